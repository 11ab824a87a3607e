"""A tiny Qwen2.5-VL built offline: real architecture, processor and chat template, random weights.

Used by the cpu engine when no model directory is configured, so that the whole
preprocessing → vision encoder → ``generate`` path runs on any machine without downloading
anything. The tokenizer is a byte-level BPE trained on a fixed corpus, the weights come from
a seeded generator, so the same seed gives the same model and the same outputs.
"""

from __future__ import annotations

from typing import Any

from lockstep.engines.prompt import SYSTEM

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

#: Qwen2.5-VL's chat template, reduced to what Lockstep sends (system, user text, images).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = (
    SYSTEM,
    "Stream window route full vision_only text_only early_exit Missing video audio ocr sensor",
    "Speech confidence On-screen text Sensor Audio chunks no transcript What is happening?",
    "a person speaks near the door, the light is on, a car passes, the screen shows EXIT",
    "0 1 2 3 4 5 6 7 8 9 . , : ; | ( ) [ ] m/s2 deg C rad/s",
)


def build(seed: int = 0, vocab_size: int = 512) -> tuple[Any, Any]:
    """Build ``(model, processor)``: a ~0.3 M-parameter Qwen2.5-VL in eval mode.

    Raises:
        ImportError: torch, torchvision or transformers is missing.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(list(_CORPUS) * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]), padding_side="left")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    special = dict(bos_token_id=None, eos_token_id=ids["<|im_end|>"],
                   pad_token_id=ids["<|endoftext|>"])
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=4096, tie_word_embeddings=True,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, **special),
        vision_config=dict(
            depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
            fullatt_block_indexes=[1]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        **special)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config).eval()
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.pad_token_id = special["pad_token_id"]
    model.generation_config.eos_token_id = special["eos_token_id"]
    # Random weights repeat one token forever; forbidding repeats keeps the output readable.
    model.generation_config.no_repeat_ngram_size = 1
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=448 * 448),
        tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(),
        chat_template=CHAT_TEMPLATE)
    return model, processor
