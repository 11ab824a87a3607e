"""Inference engines (reference, cpu, trtllm, openai, plugins), prompts, and batching."""
