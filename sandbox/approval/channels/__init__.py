"""Where humans answer: a terminal (`console`), any code reading the store (`queue`), and
a web page (`web`)."""
