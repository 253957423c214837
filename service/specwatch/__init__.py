"""specwatch: is speculative decoding paying off right now?"""

__version__ = "0.4.0"
