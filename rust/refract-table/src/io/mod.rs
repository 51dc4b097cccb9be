//! Storage: object-store resolution, request counting, path validation, Lance files and deletion files.
