"""CosyVoice 2 (FunAudioLLM/CosyVoice2-0.5B), the SSD paper's own system, driven by our decoders.

Nothing here is imported by the package at start-up: the preset imports it when chosen.
"""
