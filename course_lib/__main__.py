"""`python -m course_lib compare A B` and `python -m course_lib plot RUN` (`lab.compare_runs`): a researcher's two
everyday looks at runs, from the records files and run folders the chapter commands write."""

from course_lib.lab.compare_runs import main

main()
