"""The cohort report's style sheet (``serving.report``): inline CSS, large type for a ward screen, print rules (the
table header repeats, rows do not split, the flags keep their colours on paper)."""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; font-size: 17px;
       color: #111; background: #fff; margin: 24px; line-height: 1.35; }
h1 { font-size: 26px; margin: 0 0 4px 0; } h2 { font-size: 20px; margin: 28px 0 8px 0; }
.note { color: #444; font-size: 15px; max-width: 60em; }
.summary { display: flex; flex-wrap: wrap; gap: 32px; align-items: flex-start; }
table.facts td { padding: 3px 14px 3px 0; vertical-align: top; } table.facts td:first-child { color: #444; }
table.facts td.n { font-weight: 600; text-align: right; font-variant-numeric: tabular-nums; }
table.adm { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
table.adm th { text-align: left; border-bottom: 2px solid #333; padding: 6px 8px; font-size: 15px; }
table.adm td { border-bottom: 1px solid #ddd; padding: 5px 8px; vertical-align: middle; }
table.adm td.num { text-align: right; } table.adm tr.refer { background: #fff3e6; }
.key { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 14px; }
.flag { display: inline-block; padding: 1px 7px; border-radius: 4px; font-size: 14px; font-weight: 600; }
.flag.refer { background: #d9822b; color: #fff; } .flag.partial { background: #6b4fa1; color: #fff; }
.flag.empty { background: #777; color: #fff; } .flag.high { background: #b3261e; color: #fff; }
.promise { border-left: 6px solid #2f6db5; background: #eef4fb; padding: 8px 12px; margin: 10px 0; max-width: 60em;
           font-weight: 600; }
.legend svg { vertical-align: middle; }
.warn { border-left: 6px solid #b3261e; background: #fdecea; padding: 8px 12px; margin: 10px 0; max-width: 60em;
        font-weight: 600; }
table.bins { border-collapse: collapse; font-size: 14px; font-variant-numeric: tabular-nums; margin-top: 6px; }
table.bins th, table.bins td { padding: 2px 10px; border-bottom: 1px solid #ddd; } \
table.bins td.num { text-align: right; }
@media print {
  body { margin: 10mm; font-size: 12pt; } h2 { break-after: avoid; }
  table.adm thead { display: table-header-group; } table.adm tr { break-inside: avoid; }
  table.adm tr.refer, .flag { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
"""
