"""Chapter 05, exercise 5: ToolRL's intermediate granularity (exact match per tool call, partial over calls)."""

from course_lib.envs import toolrl_reward as rewards


def intermediate_correctness(truth, text: str, low: float = -3.0, high: float = 3.0) -> float:
    """R_correct where each true call scores its full 1 + |K_g| only if some predicted call matches it exactly
    (name and every argument), else 0; the tool-name Jaccard term stays partial, as in the fine reward."""
    predicted = rewards.parse_calls(text)
    if predicted is None:
        return low
    if rewards.same_calls(truth, predicted):
        return high
    s = rewards.multiset_jaccard([n for n, _ in truth], [n for n, _ in predicted])
    s_max = 1.0
    unused = [(n, dict(a)) for n, a in predicted]
    for name, args in truth:
        s_max += 1 + len(args)
        if (name, dict(args)) in unused:
            unused.remove((name, dict(args)))
            s += 1 + len(args)
    return (high - low) * s / s_max + low


W = ("get_weather", (("city", "paris"), ("day", "monday")))
C = ("call_contact", (("person", "anna"),))
truth = [W, C]
cases = {
    "exact": [C, W],
    "wrong value": [("get_weather", (("city", "paris"), ("day", "friday"))), C],
    "wrong key": [("get_weather", (("origin", "paris"), ("day", "monday"))), C],
    "missing call": [W],
    "wrong tool": [("set_alarm", (("time", "5"), ("day", "monday"))), C],
}
print("R_correct      fine  intermediate  coarse")
for label, calls in cases.items():
    text = "<tool_call> " + " ".join(rewards.render_call(*c) for c in calls) + " </tool_call>"
    fine = rewards.correctness(truth, text)
    coarse = rewards.correctness(truth, text, coarse=True)
    print(f"{label:12}  {fine:+.2f}  {intermediate_correctness(truth, text):+12.2f}  {coarse:+6.2f}")
