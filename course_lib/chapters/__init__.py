"""Per-chapter configuration and glue: one module per chapter, named after its notebook."""
