"""``python -m recipelab`` is the ``recipelab`` command."""

from recipelab.cli import main

main()
