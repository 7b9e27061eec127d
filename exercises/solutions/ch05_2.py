"""Chapter 05, exercise 2: what would three seeds have told you about fine - coarse?"""

from itertools import combinations

from course_lib.chapters import ch05_toolrl as ch05
from course_lib.course import recorded

differences = recorded.recorded_numbers(recorded.load("ch05"), "fine_minus_coarse")
subsets = list(combinations(differences, 3))
excludes = agree = 0
for trio in subsets:
    _, low, high = ch05.paired_interval(list(trio))
    excludes += low > 0 or high < 0
    agree += all(d > 0 for d in trio) or all(d < 0 for d in trio)
print(f"{len(subsets)} subsets of 3 of the {len(differences)} recorded seeds")
print(f"3-seed 95% interval excludes 0: {excludes}")
print(f"all three seeds on the same side of 0: {agree}")
_, low, high = ch05.paired_interval(differences)
print(f"all {len(differences)} seeds: interval [{100 * low:+.1f}, {100 * high:+.1f}] points")
