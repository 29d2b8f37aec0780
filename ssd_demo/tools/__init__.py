"""The command-line tools behind `python -m ssd_demo COMMAND`: synth, bench, eval, sweep, stimuli and
training. They use the library, never the app."""
