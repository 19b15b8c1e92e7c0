"""Reading bash: the tree-sitter-bash parse (`parse`, the entry points; `model`, what a
parse yields; `words`, quote removal; `grammar`, tree-sitter itself and bounded parsing;
`walk`, `checks` and `script`, the walk of a tree; `guard`, the parse worker process) and the
re-lexer that checks it agrees with bash's own reading (`agreement`). Knows nothing of
policies or processes."""
