"""Tokens -> speech: the Synthesizer (text -> prompt -> tokens -> audio, timed), the embedded voice's codec,
and audio streamed by chunk."""
