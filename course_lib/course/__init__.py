"""The course's machinery: what runs, records and decides the chapters (`course_lib.chapters`).

`claims` and `verdicts` (what each chapter must reproduce, and the rule that decides it), `designs` and `chance`
(seeds by power, and a mechanism's chance of failing), `results` (recorded seeds and their provenance), `build` (the
chapters' data), `audit` (held-out splits checked against training data), `golden` (digests of exact arithmetic),
`notebooks` (run, refresh, minutes), `student_edition` (the notebooks and exercises without the answers),
`study_time` (a chapter's study time, from its cells), `scaffold` (a new chapter outside the course), `standins`
(models of other families for tests), `diagrams`, `pitfalls`, `gpu_preset` and `bench`.
"""
