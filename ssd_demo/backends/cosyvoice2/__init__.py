"""CosyVoice 2 (FunAudioLLM/CosyVoice2-0.5B), the SSD paper's own system, driven by our decoders.

Nothing here is imported by the package at start-up: the preset imports it when chosen.
"""

#: The SSD paper's layer draft: the target's bottom 2 and top 6 layers (`llm.layer_draft`); here, apart from the
#: models' code, so that a training recipe can name it without loading torch.
PAPER_DRAFT_LAYERS = (2, 6)  # bottom, top
