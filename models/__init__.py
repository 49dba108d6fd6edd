"""Flax NNX Llama-2 and GPT-3 decoders with named, recomputable ops."""
