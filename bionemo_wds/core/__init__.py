"""Pure helpers, no I/O: the tokenizer, named random streams (seeds), the seeded permutation
and lineage tags, shared by the prepare and load sides."""
