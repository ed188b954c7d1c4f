"""The Hugging Face Hub: a repository's files (snapshots), one GGUF file (gguf_files), and the one entry that
downloads what the user asked for (download)."""
