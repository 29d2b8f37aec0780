"""The Compare tab's explanations for a visitor: how speculative decoding works, and how to read the token view.
Plain text; `tab` places them.
"""

HOW_IT_WORKS = """
**Speculative decoding** (Leviathan et al. 2023; Chen et al. 2023) makes an autoregressive model
faster without retraining it. Each round, a small **draft** model proposes *K* speech tokens one
by one; the large **target** model then scores all of them in **one** forward pass. Drafted tokens
are kept left to right while they pass an acceptance test; at the first failure the target samples
a **replacement** from the leftover probability mass, and if all *K* pass it adds a **bonus** token
for free. Every round therefore yields between 1 and *K*+1 tokens for a single target call.

Write **q** for the target's distribution and **p** for the draft's (both after temperature, top-k
and top-p, so the test uses exactly what was sampled). With the exact rule (β = 0) a drafted token *x*
is accepted with probability min(1, q(x)/p(x)), and the output has exactly the target's distribution. **Speech speculative decoding** (SSD; Lin et al.,
*Accelerating Autoregressive Speech Synthesis Inference With Speech Speculative Decoding*,
Interspeech 2025, [arXiv 2505.15380](https://arxiv.org/abs/2505.15380)) adds a tolerance **β**:
accept if r < min(1, q/p) + β. Speech tokens are redundant (many codes sound alike), so a larger
β accepts more drafted tokens, i.e. more speed, at the cost of drifting from the target's
distribution (the paper: 1.4× on the LM at β = 0.4, with WER rising from 3.67 % to 5.70 % and naturalness MOS unchanged). The expected speedup is
(1 − α^(K+1)) / ((1 − α)(K·c + 1)), where α is the per-token acceptance and c the cost of a draft
step relative to a target step: a draft only helps when α > c.

Other rules: **topk** accepts a drafted token that is among the target's top-k; **pcg** accepts at
the level of groups of acoustically similar tokens (arXiv 2511.13732). **Adaptive K** picks each
round's draft length from the running acceptance rate.

**Drafts of the embedded voice.** *heads* (the default): two small blocks that read the target's own last
hidden state, from its verify call, and roll it forward one token at a time through the target's own
embedding and output layer, so a round costs one target call plus a few cheap steps; *distilled*: a
one-layer model trained to imitate the target; *layers*: the paper's kind of draft, a few of the target's
own layers. At β = 0 all three leave the output distribution exactly the target's; they differ in speed.
"""

TOKENS_LEGEND = (
    "**Every speculative round** (rounds separated by `|`): drafted tokens the target "
    "*accepted*, the first *rejected* one with the target's *replacement* (→), drafted "
    "tokens *discarded* after it, and the *bonus* token (+) after a fully accepted block. "
    "On the embedded voice, numbers are codec codes, `|` ends a phoneme and /ə/ is the next "
    "phoneme, *inserted* by the decoder (never sampled, so never rejected). A word said alone is "
    "said after \"Listen.\", whose tokens show here but are never heard: without it, the "
    "voice says such words unclearly (Whisper misheard a third of them)."
)
