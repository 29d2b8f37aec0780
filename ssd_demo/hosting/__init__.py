"""Hosting the demo elsewhere: `space` (the files a Hugging Face Space needs, and pushing them through the Hub's API)."""
