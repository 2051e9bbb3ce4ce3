"""`python -m sealbench.schemas`: regenerate the shipped JSON Schemas (docs/formats.md)."""

from sealbench.schemas import main

main()
