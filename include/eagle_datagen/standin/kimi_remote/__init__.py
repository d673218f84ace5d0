"""The remote code of the Kimi-K2.5 stand-in tokenizer (tokenization_kimi.py and its TypeScript tool encoder).

These files are copied into the stand-in's folder and loaded from there by transformers with
`trust_remote_code`, exactly as the real folder's code is; the package never imports them itself.
"""
