"""A tiny random Whisper built offline: byte-level tokenizer, Whisper's special tokens, 16-wide model.

Its transcripts are noise; it exists to run the real loading, feature extraction, generation (short and
long-form) and decoding code of `ssd_demo.measure.asr` without a download.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers.pre_tokenizers import ByteLevel
from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                          WhisperProcessor, WhisperTokenizer)

SPECIALS = ("<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
            "<|nospeech|>", "<|notimestamps|>")
END = "<|endoftext|>"


def build_tiny_whisper(folder: Path, seed: int = 0, max_new_tokens: int = 12) -> Path:
    """Save a tiny Whisper checkpoint (model, generation config, processor) into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # every byte is a token (no merges): any transcript decodes, and the vocabulary stays at 256 + specials
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), unk_token=END,
                                 bos_token=END, eos_token=END, pad_token=END)
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIALS)})
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in (END, *SPECIALS)}
    config = WhisperConfig(vocab_size=len(tokenizer), num_mel_bins=80, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=2, decoder_attention_heads=2, d_model=16, encoder_ffn_dim=32,
                           decoder_ffn_dim=32, max_source_positions=1500, max_target_positions=64,
                           pad_token_id=ids[END], bos_token_id=ids[END], eos_token_id=ids[END],
                           decoder_start_token_id=ids["<|startoftranscript|>"])
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids[END], pad_token_id=ids[END],
        bos_token_id=ids[END], max_new_tokens=max_new_tokens, is_multilingual=True,
        lang_to_id={"<|en|>": ids["<|en|>"]},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"])
    model.save_pretrained(folder)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer).save_pretrained(folder)
    return folder
