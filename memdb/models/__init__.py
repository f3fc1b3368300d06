"""The local models memdb runs: where their files come from (assets), llama.cpp (llama), the
numpy MiniLM (minilm), embedders by name (embedders), OpenAI-compatible endpoints (endpoint), and
the worker process the extraction model runs in (worker).
Both kinds of model sit behind small protocols (protocols), so tests and users plug in their own."""
