"""The command line behind `python -m ssd_demo COMMAND`: one module per command, holding its flags
(`add_arguments`) and its `main` (what it prints and writes). The work is the library's (measure, listening,
training, comparison); the library and the app never import this package."""
