"""The subcommands of `specchat`, one module each: `add_parser(subparsers)` adds the command and its arguments,
`run(args)` runs it and returns the exit status (specchat/cli.py builds the parser from them). Importing a command
module is torch-free, because `specchat --help` builds every parser: torch, transformers and the models load
inside `run`. Beside the commands: options.py (the options they share), loading.py (those options read once into
RunOptions, and the pair they name) and the helpers a command runs on (terminal.py, measure_costs.py,
catalog_report.py, stats_report.py, selftest.py)."""
