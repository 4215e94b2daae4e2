//! The configuration reference, generated from the declarations of every broker key
//! ([`BROKER_CONFIGS`]) and topic key ([`TOPIC_CONFIGS`]): `ferry config-reference` prints it and
//! `docs/configuration.md` holds it (a test keeps the two equal).

use crate::broker_config::{BrokerConfig, BROKER_CONFIGS};
use crate::topic_config::TOPIC_CONFIGS;

/// The configuration reference as Markdown tables (what `docs/configuration.md` holds;
/// `ferry config-reference` prints it).
pub fn reference_markdown() -> String {
    let mut out = String::new();
    out.push_str("## Broker keys\n\n| key | type | default | meaning |\n|---|---|---|---|\n");
    for d in BROKER_CONFIGS {
        let default = if d.default.is_empty() {
            "(empty)"
        } else {
            d.default
        };
        out.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            d.name,
            d.ty.name(),
            default,
            d.doc
        ));
    }
    out.push_str("\n## Topic keys\n\nSet per topic with CreateTopics, AlterConfigs or IncrementalAlterConfigs (for example `kafka-configs.sh --alter --entity-type topics`). A topic without an override uses the broker key in the second column.\n\n| key | type | broker default from | meaning |\n|---|---|---|---|\n");
    let broker = BrokerConfig::default();
    for t in TOPIC_CONFIGS {
        let from = broker
            .topic_default(t.name)
            .map(|(_, key, _)| format!("`{key}`"))
            .unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            t.name,
            t.ty.name(),
            from,
            t.doc
        ));
    }
    out
}
