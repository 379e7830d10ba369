//! The choice memory of placement: the super chosen for a tenant namespace whose super
//! namespace exists nowhere yet. Placement is read back from where super namespaces exist;
//! until one does, this keeps one choice, so that objects reconciled meanwhile agree.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::key::SuperId;

/// The supers chosen for one tenant's namespaces (held by its `TenantState`).
#[derive(Debug, Default)]
pub struct Choices(Mutex<BTreeMap<String, SuperId>>);

impl Choices {
    /// The super chosen for tenant namespace `namespace`: `choose` picks one the first time.
    pub fn chosen(
        &self,
        namespace: &str,
        choose: impl FnOnce() -> Option<SuperId>,
    ) -> Option<SuperId> {
        let mut chosen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = chosen.get(namespace) {
            return Some(*i);
        }
        let i = choose()?;
        chosen.insert(namespace.to_string(), i);
        Some(i)
    }

    /// Forgets the choice for `namespace` (it no longer holds, or is no longer needed).
    pub fn forget(&self, namespace: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(namespace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_holds_until_forgotten() {
        let choices = Choices::default();
        assert_eq!(choices.chosen("shop", || None), None);
        assert_eq!(
            choices.chosen("shop", || Some(SuperId(1))),
            Some(SuperId(1))
        );
        assert_eq!(
            choices.chosen("shop", || Some(SuperId(0))),
            Some(SuperId(1))
        );
        choices.forget("shop");
        assert_eq!(
            choices.chosen("shop", || Some(SuperId(0))),
            Some(SuperId(0))
        );
    }
}
