"""Which XCodec2 checkpoint the Llasa pairs decode with, at which commit: names alone (no torch), so that the
command line's flags and the app's fields can show them; `llasa_loading` pins and loads it."""

#: XCodec2 in transformers' native format: the checkpoint transformers' own Xcodec2 docs name, with the
#: tensor names of its Xcodec2Model (HKUSTAudio/xcodec2 itself needs remote code, and a conversion made
#: before transformers merged the model carries older tensor names, which would load as random weights).
DEFAULT_CODEC = "HKUSTAudio/xcodec2-hf"
#: The codec's pinned commit: its 811 tensors are the names and shapes of Xcodec2Model(Xcodec2Config()).
DEFAULT_CODEC_REVISION = "64bd034d12d441299cdd535b15c33efd6ccdf252"
