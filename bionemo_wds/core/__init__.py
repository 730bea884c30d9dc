"""Pure helpers, no I/O: the tokenizer, named random streams (seeds), the seeded permutation,
lineage tags and the window rules, shared by the prepare and load sides."""
