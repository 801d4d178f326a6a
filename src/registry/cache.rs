//! Schemas by id, kept forever: a registry never changes what an id names, so one request per
//! new id is all the sink ever needs, however many records and tasks ask at once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::{RegisteredSchema, RegistryError};

/// One slot per id; concurrent first askers share the one fetch.
#[derive(Default)]
pub(super) struct SchemaCache {
    slots: Mutex<HashMap<u32, Arc<OnceCell<Arc<RegisteredSchema>>>>>,
}

impl SchemaCache {
    /// The schema of `id`, from the cache or from `fetch`. A failed fetch leaves the slot
    /// empty, so the next ask tries again (the registry may be back, or the id registered).
    pub(super) async fn get_or_fetch<F, Fut>(
        &self,
        id: u32,
        fetch: F,
    ) -> Result<Arc<RegisteredSchema>, RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<RegisteredSchema, RegistryError>>,
    {
        let slot = {
            // A poisoned lock only means another task panicked holding it; the map is intact.
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(slots.entry(id).or_default())
        };
        slot.get_or_try_init(|| async { fetch().await.map(Arc::new) })
            .await
            .cloned()
    }

    /// How many schemas are held; for tests and the curious.
    pub(super) fn len(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.values().filter(|s| s.initialized()).count()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::registry::SchemaKind;

    fn schema(text: &str) -> RegisteredSchema {
        RegisteredSchema::new(SchemaKind::Avro, text)
    }

    #[tokio::test]
    async fn concurrent_askers_share_one_fetch_and_later_ones_none() {
        let cache = Arc::new(SchemaCache::default());
        let fetches = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (cache, fetches) = (Arc::clone(&cache), Arc::clone(&fetches));
                tokio::spawn(async move {
                    cache
                        .get_or_fetch(5, || async {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                            Ok(schema("five"))
                        })
                        .await
                })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().unwrap().text, "five");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        let again = cache
            .get_or_fetch(5, || async { panic!("cached ids are not fetched") })
            .await;
        assert_eq!(again.unwrap().text, "five");
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn a_failure_is_not_cached() {
        let cache = SchemaCache::default();
        let err = cache
            .get_or_fetch(9, || async {
                Err(RegistryError::Unavailable("down".into()))
            })
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::Unavailable(_)));
        assert_eq!(cache.len(), 0);
        let ok = cache.get_or_fetch(9, || async { Ok(schema("nine")) }).await;
        assert_eq!(ok.unwrap().text, "nine");
    }
}
