"""A user's own material: files read into text and passages (no Qt, no torch, no engine).

`model` holds the plain values every other room shares (a document's text, pages and passages); `reading` turns a
file into one, within bounds, treating every byte as hostile.
"""
