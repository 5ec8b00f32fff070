"""A byte-level BPE trained offline on the task corpus, saved in Hugging Face format.

Digits are split one per token so arithmetic is learnable by tiny models; `\\boxed` and the
prompt scaffolding become single tokens through BPE merges.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from sparserl.core.artifacts import atomic_dir

EOS, PAD = "<|endoftext|>", "<|pad|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | Path,
                    max_length: int = 64):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   model_max_length=max_length, padding_side="left")
    with atomic_dir(out_dir) as tmp:  # readable by the group under umask 022, not 0700
        fast.save_pretrained(tmp)
    return fast
