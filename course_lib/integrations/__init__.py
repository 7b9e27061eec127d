"""The course's environments and rewards on the engines the papers used: TRL's `GRPOTrainer` (`trl`) and verl's
agent loop (`verl`); and any course environment served as an OpenEnv environment (`openenv`). Each module imports
its engine, which is an optional extra of the package."""
