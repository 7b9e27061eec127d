"""The engine: how a policy plays text environments, token in, token out.

`rollout` (the batched `RolloutEngine`, the `Trajectory` and `RolloutBatch` data model, and the turn rule every
engine shares), `server_engine` (the same turns over an inference server: verl's agent loop), `hf_decoder` and
`kv_decoder` (the decoders behind the engine: a static KV cache for the Llama family, the model's own forward for
any other), `prompt_format` (plain or a chat template), `step_mode` (one short sequence per environment step) and
`tree_rollout` (ARPO's and AEPO's entropy-guided trees).
"""
