"""`python -m course_lib.chapters ch07 --seeds 0 1 2 --record`: chapter `ch07`'s command line, found by its key
(`chapters.load`), the same as `python -m course_lib.chapters.ch07_gigpo ...`."""

import sys

from course_lib import chapters

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__.splitlines()[0])
    print("chapters: " + " ".join(chapters.modules()))
    sys.exit(0 if len(sys.argv) >= 2 else 2)
key, argv = sys.argv[1], sys.argv[2:]
sys.argv = [f"python -m course_lib.chapters {key}"]  # the name argparse shows in its usage line
chapters.load(key).main(argv)
