"""One module per benchmark suite of ``hepix bench --suite``."""
