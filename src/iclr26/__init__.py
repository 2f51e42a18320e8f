"""iclr26: one pipeline that regenerates the headline tables of 19 ICLR 2026 papers."""
__version__ = "0.1.0"
