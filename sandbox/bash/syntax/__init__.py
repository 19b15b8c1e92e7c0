"""Reading bash: the tree-sitter-bash parse (`parse`) and the re-lexer that checks it
agrees with bash's own reading (`agreement`). Knows nothing of policies or processes."""
