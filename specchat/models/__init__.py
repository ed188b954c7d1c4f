"""Getting models: where a model comes from as the user names it (sources), the curated catalog and what fits here
(catalog/), downloads from the Hugging Face Hub (hub/), and the offline pair. Imports neither torch nor Qt: loading
a model is engine/loading's."""
