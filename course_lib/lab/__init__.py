"""The course's tools, above the chapters: what walks every chapter through `chapters.index()` and names none.

- `build` (`python -m course_lib.data build chNN`: a chapter's data), `golden` (the golden run: digests of what
  the engine and an update compute), `bench` (the benchmarks), `gpu_preset` (the chapters under the gpu preset).
- `verdicts` (the course-level verdict of every claim) with `verdict_docs` (`docs/claims.md` and the README's
  column), `audit` (every chapter's leakage audit), `design_runs` (the pre-registered designed settings: pilot,
  decision, plot).
- `notebooks` (execute and refresh the notebooks), `study_time`, `student_edition`, `scaffold` (a new chapter's
  files).
"""
