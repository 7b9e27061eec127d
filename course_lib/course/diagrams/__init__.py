"""One algorithm diagram per chapter, drawn with matplotlib from a small worked example that the library computes
(so a diagram cannot show numbers the method would not produce). One module per diagram:

- `step_groups` (chapter 07, GiGPO): episodes of one group, the step groups their repeated states form, and the
  step advantages.
- `rollout_tree` (chapter 08, ARPO): a tree rollout branching where the policy's entropy rises.
- `echo_trap` (chapter 09, RAGEN): the Echo Trap's timeline, reward spread and entropy falling before success does.
- `cross_scoring` (chapter 10, RAGEN-2): the matrix of log p(z_i | x_j) behind the mutual-information estimate.
- `two_clips` (chapter 11, AEPO): PPO's clip against AEPO's entropy-balanced clip, as functions of the ratio.
- `capstone` (chapter 12): the capstone's loop, which seam each part plugs into.
"""
