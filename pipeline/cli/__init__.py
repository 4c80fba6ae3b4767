"""The command line: its options, settings and commands (nothing in the library imports it)."""
