"""The RL loop: from demonstrations to a trained policy.

`warm_start` (the supervised warm start), `train` (`GRPOConfig`, `train_grpo`, `policy_iteration`), `loop` (the four
seams chosen by name: sampler, advantage estimator, batch filter, policy loss), `critic` (PPO's value model),
`micro_batch` (the update split by a token budget with the whole batch's gradient), `checkpoint` (a Hugging Face
checkpoint as a policy), `run_state` (what a resumable run saves), `tracking` (experiment trackers) and `validation`
(the checks every config runs when it is made).
"""
