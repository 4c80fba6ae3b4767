"""The docs figures of the subnetwork Laplace benchmarks (``laplace_fit``, ``laplace_jacobian_groups``),
from their results JSON: ``render_fit`` and ``render_jacobian_groups`` (``benchmarks.report`` calls them)."""

from __future__ import annotations

import re

from benchmarks import report


def load_average(r: dict) -> str:
    """'load average A at the start, B at the end' where the result recorded it."""
    start, end = r.get("loadavg_start"), r.get("loadavg_end")
    if start is None:
        return "load average not recorded"
    text = f"load average {start[0]:.1f} at the start"
    return text + (f", {end[0]:.1f} at the end" if end is not None else "") + f" on {r.get('cpu_count', '?')} CPUs"


def render_fit(r: dict) -> str:
    """docs/laplace.md's figures:laplace_fit section (``benchmarks.laplace_fit``'s JSON)."""
    fits = sorted(r["fits"], key=lambda f: (f["hidden"], f["subnet_size"]))
    hiddens = sorted({f["hidden"] for f in fits})
    n_train = sorted({f["n_train_used"] for f in fits})
    head = (f"{', '.join(f'{n:,}' for n in n_train)} training admissions in the GGN "
            f"({'all' if r.get('max_train') is None else 'a subsample of ' + format(r['max_train'], ',')}), "
            f"{r['selection']} selection, λ given (the MAP run's 2·l2·N_train, no grid), MAP runs of "
            f"{r['map_steps']} steps, {r['threads']} torch thread(s), {load_average(r)}. Wall seconds per stage; "
            f"fit RSS is the peak resident memory of the fit above the memory it started from"
            + (" (VmHWM reset after loading and after a warm-up fit)" if all(f.get("peak_reset") for f in fits) else "")
            + ":")
    rows = []
    for f in fits:
        st = f["stages_s"]
        rows.append([str(f["hidden"]), f"{f['n_params']:,}", f"{f['subnet_size']:,}", f"{f['fit_s']:.1f}",
                     f"{st['select']:.1f}", f"{st['ggn']:.1f}", f"{st['factorize']:.1f}",
                     f"{st.get('validation', 0.0):.1f}", f"{f['fit_rss_mb']:,.1f}", f"{f['posterior_mb']:,.1f}"])
    out = [head, "", report.table(["LSTM", "D", "S", "fit s", "select s", "GGN s", "Cholesky s", "validation s",
                             "fit RSS MB", "factor C MB"], rows), ""]
    growth = r.get("growth", {})
    if growth:
        by_size = sorted(growth.items(), key=lambda kv: int(kv[0]))  # [(LSTM size, its growth figures)]
        fits_txt = "; ".join(f"LSTM {h}: fit RSS = {g['rss_floor_mb']:.1f} MB + {g['rss_bytes_per_s2']:.1f} bytes·S²"
                             for h, g in by_size)
        above = " / ".join(f"{g['rss_exponent_above_floor']:.2f}" if g.get("rss_exponent_above_floor") else "n/a"
                           for _, g in by_size)
        whole = " / ".join("n/a" if g.get("rss_exponent_all") is None else f"{g['rss_exponent_all']:.2f}"
                           for _, g in by_size)
        last = " / ".join("n/a" if not g.get("rss_exponent_steps") else f"{g['rss_exponent_steps'][-1]:.2f}"
                          for _, g in by_size)
        sizes = sorted({f["subnet_size"] for f in fits})
        out.append(f"- Memory against S (least squares): {fits_txt}; 16 bytes·S² is two float64 S x S matrices (the "
                   f"GGN and its Cholesky factor). Growth exponent of the part above the floor: **{above}** "
                   f"(LSTM {' / '.join(str(h) for h in hiddens)}); of the whole increment {whole} over "
                   f"{sizes[0]:,}..{sizes[-1]:,}, {last} from {sizes[-2]:,} to {sizes[-1]:,}.")
    same = r.get("same_s", {})
    if same and len(hiddens) == 2:
        lo, hi = hiddens
        keys = sorted(same, key=int)
        d_ratio = same[keys[0]]["d_ratio"]
        rss = ", ".join(f"x{same[k]['rss_ratio']:.2f}" for k in keys)
        tim = ", ".join(f"x{same[k]['time_ratio']:.2f}" for k in keys)
        out.append(f"- Same S on the LSTM {hi} ({d_ratio:.1f} times the weights) against the LSTM {lo}, for S = "
                   f"{', '.join(f'{int(k):,}' for k in keys)}: fit RSS {rss}; fit time {tim}.")
        g_lo, g_hi = growth.get(str(lo)), growth.get(str(hi))
        d_lo = next(f["n_params"] for f in fits if f["hidden"] == lo)
        d_hi = next(f["n_params"] for f in fits if f["hidden"] == hi)
        if g_lo and g_hi:
            diff = g_hi["rss_floor_mb"] - g_lo["rss_floor_mb"]
            out.append(f"- The floors differ by {diff:.1f} MB for the LSTM {hi}'s {d_hi - d_lo:,} more weights "
                       f"({diff * 2**20 / (d_hi - d_lo):.0f} bytes each).")
    sel = {h: [f["stages_s"]["select"] for f in fits if f["hidden"] == h] for h in hiddens}
    out.append("- Wasserstein selection (the diagonal pass over all D weights) took "
               + "; ".join(f"{min(v):.1f}-{max(v):.1f} s on the LSTM {h}" for h, v in sel.items())
               + ", whatever S.")
    grid = r.get("grid_search")
    if grid:
        big = max((f for f in fits if f["hidden"] == grid["hidden"]), key=lambda f: f["subnet_size"])
        n_grid = r.get("grid_size")
        what = f"{n_grid} values of λ" if n_grid else "the benchmark's default grid of λ"
        per = (f"; each value costs one Cholesky factorization ({big['stages_s']['factorize']:.1f} s at S = "
               f"{big['subnet_size']:,} on this LSTM)")
        out.append(f"- Grid search ({what}, LSTM {grid['hidden']}, S = {grid['subnet_size']:,}): "
                   f"{grid['stages_s']['prior_search']:.1f} s on top of the validation Jacobians{per}; it chose "
                   f"λ = {lam(grid['prior_precision'])}.")
    scoring = r.get("scoring", {})
    if scoring:
        def size(key: str) -> int:  # laplace_s<S>_probit | laplace_s<S>_mc25
            return int(re.search(r"_s(\d+)_", key).group(1))

        names = sorted({k for s in scoring.values() for k in s["map_over_laplace"]},
                       key=lambda k: (size(k), k.endswith("mc25")))
        label = {k: f"S = {size(k):,} " + ("MC x25" if k.endswith("mc25") else "probit") for k in names}
        admissions = sorted({s["admissions"] for s in scoring.values()})
        out += ["", (f"Scoring throughput on the {', '.join(str(a) for a in admissions)} test admissions "
                     f"(`predict.feature_logits`, batches of 256, one process, the models in alternating blocks, "
                     f"median of the repeats): admissions/s, and MAP admissions/s over Laplace admissions/s in "
                     f"brackets:"), ""]
        rows = []
        for h, s in sorted(scoring.items(), key=lambda kv: int(kv[0])):
            rates = s["admissions_per_s"]
            rows.append([h, f"{rates['map']:,.1f}"] + [f"{rates[k]:,.1f} (x{s['map_over_laplace'][k]:.1f})"
                                                       for k in names])
        out.append(report.table(["LSTM", "MAP adm/s"] + [label[k] for k in names], rows))
    return "\n".join(out)


def lam(value: float) -> str:
    """A prior precision, 3 significant digits (1e4 rather than 1e+04)."""
    return f"{value:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def render_jacobian_groups(r: dict) -> str:
    """docs/laplace.md's figures:laplace_jacobian_groups section (``benchmarks.laplace_jacobian_groups``'s JSON)."""
    groups = sorted({row["group"] for row in r["rows"]})
    keys = sorted({(row["hidden"], row["weights"]) for row in r["rows"]}, key=lambda k: (k[0], k[1] != "all"))
    ms = {(row["hidden"], row["weights"], row["group"]): row["ms_per_admission"] for row in r["rows"]}
    rows = [[str(h), "all D" if w == "all" else f"{int(w):,} random", *(f"{ms[(h, w, g)]:.1f}" if (h, w, g) in ms
                                                                         else "" for g in groups)] for h, w in keys]
    head = (f"Milliseconds per admission for the subnetwork Jacobian, {r['admissions']} training admissions (longest "
            f"first), {r['threads']} torch thread(s), {load_average(r)}; columns: admissions per backward group:")
    return "\n".join([head, "", report.table(["LSTM", "Jacobian w.r.t.", *(str(g) for g in groups)], rows)])
