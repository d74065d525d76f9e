//! Requirement catalogues: every normative statement of a protocol's sources
//! that conform grades, quoted, with its level and the role it binds.

use crate::case::Level;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    pub id: String,
    pub level: Level,
    /// The side the requirement binds.
    pub role: crate::suite::Role,
    /// The source file and the part of it.
    pub source: String,
    /// The requirement in the source's own words.
    pub quote: String,
    /// How conform reads it, where that needs saying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading: Option<String>,
    /// Why no case can check it, for a requirement left without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_case: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalogue {
    pub protocol: crate::suite::Protocol,
    pub requirements: Vec<Requirement>,
}

impl Catalogue {
    pub fn parse(text: &str) -> Result<Catalogue, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    pub fn get(&self, id: &str) -> Option<&Requirement> {
        self.requirements.iter().find(|r| r.id == id)
    }
}
