//! The table schema as Lance records it (`lance.file.Field`s with ids) and
//! as the engine uses it (an Arrow schema).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use lance_core::datatypes::Schema as LanceSchema;
use lance_file::datatypes::{Fields, FieldsWithMeta};
use lance_file::format::pb as file_pb;
use refract_core::{Error, Result};

/// The Lance schema of a dataset: its fields with their ids, and the
/// schema metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableSchema {
    /// Every field, nested ones included, in Lance's pre-order with ids.
    pub fields: Vec<file_pb::Field>,
    /// Schema metadata.
    pub metadata: HashMap<String, Vec<u8>>,
}

impl TableSchema {
    /// The Lance schema of a new table with `schema` (ids assigned in pre-order from 0).
    ///
    /// # Errors
    /// InvalidInput when Lance cannot store a column's type.
    pub fn for_new_table(schema: &ArrowSchema) -> Result<TableSchema> {
        let lance = LanceSchema::try_from(schema).map_err(|e| {
            Error::invalid_input(format!("the schema cannot be stored in Lance: {e}"))
        })?;
        Ok(Self::from_lance(&lance))
    }

    /// The record of a Lance schema.
    pub fn from_lance(schema: &LanceSchema) -> TableSchema {
        let with_meta = FieldsWithMeta::from(schema);
        TableSchema {
            fields: with_meta.fields.0,
            metadata: with_meta.metadata,
        }
    }

    /// The Lance schema (what data files are written with, so their field
    /// ids are the dataset's).
    ///
    /// # Errors
    /// Corrupt (the manifest) when the recorded fields do not form a schema.
    pub fn to_lance(&self) -> Result<LanceSchema> {
        let with_meta = FieldsWithMeta {
            fields: Fields(self.fields.clone()),
            metadata: self.metadata.clone(),
        };
        // lance-core may panic on field records it does not expect; building
        // touches only the clone above, so a caught panic breaks nothing.
        std::panic::catch_unwind(|| LanceSchema::try_from(with_meta))
            .map_err(|_| Error::corrupt("manifest", "the schema holds an unsupported field"))?
            .map_err(|e| Error::corrupt("manifest", format!("the schema does not decode: {e}")))
    }

    /// The Arrow schema scans return.
    ///
    /// # Errors
    /// Corrupt (the manifest) when the recorded fields do not form a schema.
    pub fn to_arrow(&self) -> Result<SchemaRef> {
        let lance = self.to_lance()?;
        // lance-core unwraps logical types it does not know while converting;
        // the conversion reads only `lance`, so a caught panic breaks nothing.
        let arrow =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ArrowSchema::from(&lance)))
                .map_err(|_| {
                    Error::corrupt("manifest", "the schema holds an unsupported field type")
                })?;
        Ok(Arc::new(arrow))
    }
}

/// Column paths (`a`, `s.b`) by field id and back, for index field lists.
#[derive(Debug, Default)]
pub(crate) struct FieldPaths {
    by_id: HashMap<i32, String>,
    by_path: HashMap<String, i32>,
}

impl FieldPaths {
    pub(crate) fn new(schema: &TableSchema) -> FieldPaths {
        let names: HashMap<i32, (&str, i32)> = schema
            .fields
            .iter()
            .map(|field| (field.id, (field.name.as_str(), field.parent_id)))
            .collect();
        let mut paths = FieldPaths::default();
        for field in &schema.fields {
            let mut parts = vec![field.name.as_str()];
            let mut parent = field.parent_id;
            // A parent chain longer than the field count is a cycle: stop there.
            let mut steps = 0;
            while parent >= 0 && steps <= names.len() {
                let Some((name, grandparent)) = names.get(&parent) else {
                    break;
                };
                parts.push(name);
                parent = *grandparent;
                steps += 1;
            }
            parts.reverse();
            let path = parts.join(".");
            paths.by_path.insert(path.clone(), field.id);
            paths.by_id.insert(field.id, path);
        }
        paths
    }

    /// # Errors
    /// Corrupt (the manifest) when no field has `id`.
    pub(crate) fn path_of(&self, id: i32) -> Result<String> {
        self.by_id.get(&id).cloned().ok_or_else(|| {
            Error::corrupt(
                "manifest",
                format!("an index names field id {id}, which the schema does not have"),
            )
        })
    }

    /// # Errors
    /// Corrupt (the manifest) when no field has the path `name`.
    pub(crate) fn id_of(&self, name: &str) -> Result<i32> {
        self.by_path.get(name).copied().ok_or_else(|| {
            Error::corrupt(
                "manifest",
                format!("an index names column {name:?}, which the schema does not have"),
            )
        })
    }
}
