//! Writes of the security records (SCRAM credentials, ACLs, client quotas) through the quorum.
//! Each call returns once its record is committed and applied to this node's image; other
//! brokers see it when their image catches up. Validation against Kafka's rules is the
//! caller's (the admin API handlers); the image refuses only records that break its invariants.

use uuid::Uuid;

use super::{MetadataError, MetadataStore};
use crate::security::{AclBinding, QuotaEntity, QuotaValue, ScramCredential, ScramMechanism};
use crate::MetadataRecord;

impl MetadataStore {
    pub async fn upsert_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        credential: ScramCredential,
    ) -> Result<(), MetadataError> {
        self.propose_async(MetadataRecord::UpsertScramCredential {
            user: user.to_string(),
            mechanism,
            credential,
        })
        .await?;
        Ok(())
    }

    pub async fn delete_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<(), MetadataError> {
        self.propose_async(MetadataRecord::DeleteScramCredential {
            user: user.to_string(),
            mechanism,
        })
        .await?;
        Ok(())
    }

    /// Stores `binding` under a fresh id, or does nothing if it is stored already.
    pub async fn create_acl(&self, binding: AclBinding) -> Result<(), MetadataError> {
        let image = self.image();
        if image.acls.values().any(|b| *b == binding) {
            return Ok(());
        }
        let mut id = Uuid::new_v4();
        while id.is_nil() || image.acls.contains_key(&id) {
            id = Uuid::new_v4();
        }
        self.propose_async(MetadataRecord::CreateAcl { id, binding })
            .await?;
        Ok(())
    }

    pub async fn delete_acl(&self, id: Uuid) -> Result<(), MetadataError> {
        self.propose_async(MetadataRecord::DeleteAcl { id }).await?;
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) one quota of `entity`.
    pub async fn alter_client_quota(
        &self,
        entity: &QuotaEntity,
        key: &str,
        value: Option<f64>,
    ) -> Result<(), MetadataError> {
        self.propose_async(MetadataRecord::AlterClientQuota {
            entity: entity.clone(),
            key: key.to_string(),
            value: value.map(QuotaValue),
        })
        .await?;
        Ok(())
    }
}
