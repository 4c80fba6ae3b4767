"""The command line (the top layer: nothing in the library imports it). ``app``: the typer app and what every
command shares (one-line errors, a config error said as the user typed it); ``main``: every command registered;
a module per command (``synth``, ``extract``, ``stage``, ``load_postgres``, ``train``, ``evaluate``, ``laplace``,
``compare``, ``score``, ``serve``, ``benchmark_models``, ``vision``), its own options dataclass beside it;
``options``: config fields as typer options; ``names``: what the command line calls each field; ``comments``:
a field's comment as its help; ``settings``: ``--config FILE.toml``, ``--set KEY=VALUE``, ``--print-config``."""
