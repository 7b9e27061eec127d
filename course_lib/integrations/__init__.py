"""The course's environments and rewards on the engines the papers used: TRL's `GRPOTrainer` (`course_trl`, with
the methods' route in `trl_chapters`) and verl's agent loop (`course_verl`); and any course environment served as an
OpenEnv environment (`openenv`). Each module imports its engine, which is an optional extra of the package. Their
commands name a chapter (`--chapter 08`) and find its task through `chapters.index()`, never by a chapter's name."""
