//! `conform list` and `--dry-run`: the cases with their ids, levels, needs
//! and the requirements they check, quoted.

use crate::case::Listing;
use crate::requirements::Catalogue;

/// The cases as text, one line a case and a line a requirement.
pub fn text(cases: &[Listing], catalogue: &Catalogue) -> String {
    let mut out = String::new();
    for c in cases {
        let needs = if c.needs.is_empty() {
            String::new()
        } else {
            format!("  (needs {})", c.needs.join(", "))
        };
        out.push_str(&format!(
            "{:<6} {}  {}{needs}\n",
            c.level.as_str(),
            c.id,
            c.title
        ));
        for req in c.requirements.iter().filter_map(|r| catalogue.get(r)) {
            out.push_str(&format!(
                "         {} [{} {}] {}: \"{}\"\n",
                req.id,
                req.level.as_str(),
                req.role,
                req.source,
                req.quote
            ));
        }
    }
    out.push_str(&format!("\n{} cases\n", cases.len()));
    out
}

/// The cases as a JSON list, each with its requirements whole.
pub fn json(cases: &[Listing], catalogue: &Catalogue) -> String {
    let items: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id, "title": c.title, "level": c.level, "needs": c.needs,
                "requirements": c.requirements.iter().map(|r| catalogue.get(r)).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::to_string_pretty(&items).unwrap_or_default()
}
