"""What the chapters stand on to state and decide their claims, below them (no module here imports a chapter):

`claims` (what each chapter must reproduce, and its verdict on one seed), `chance` (a mechanism's chance of failing),
`designs` (a pre-registered design and the seeds its power asks for), `recorded` (recorded seeds, their provenance and
curves), `leakage` (the helpers a chapter's audit of its held-out splits is written with), `golden_cases` (what a
chapter's golden-run cases compute), `standins` (models of other families, for tests and chapters 14-15),
`diagrams` (the notebooks' algorithm diagrams), `pitfalls` (chapter 15's checks) and `bug_hunt` (chapter 15's loop
with planted pitfalls, found with those checks). The tools that walk the chapters are `course_lib.lab`.
"""
