//! The orders every exactly-once test produces, checked column by column.

use super::db::TestDb;
use super::kafka::order_json;

/// Every row of `table` holds exactly what order `id`'s record said, and the rows are exactly
/// `ids` (each once): nothing lost, duplicated or altered.
pub async fn assert_orders_are(db: &TestDb, table: &str, ids: &[i64]) {
    /// id, customer, amount, status, created_at (ms), attrs
    type OrderRow = (i64, String, String, Option<String>, i64, serde_json::Value);
    let rows: Vec<OrderRow> = sqlx::query_as(&format!(
        "SELECT id, customer, amount::text, status, (extract(epoch FROM created_at) * 1000)::int8,
                attrs FROM \"{table}\" ORDER BY id"
    ))
    .fetch_all(&db.pool)
    .await
    .expect("read orders");
    let mut want: Vec<i64> = ids.to_vec();
    want.sort_unstable();
    let got: Vec<i64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(got, want, "the rows are not exactly the expected orders");
    for (id, customer, amount, status, created_ms, attrs) in rows {
        let expected: serde_json::Value = serde_json::from_str(&order_json(id)).unwrap();
        assert_eq!(customer, expected["customer"].as_str().unwrap(), "id {id}");
        assert_eq!(amount, expected["amount"].as_str().unwrap(), "id {id}");
        assert_eq!(status.as_deref(), expected["status"].as_str(), "id {id}");
        assert_eq!(created_ms, 1_700_000_000_000 + id * 1000, "id {id}");
        assert_eq!(attrs, expected["attrs"], "id {id}");
    }
}
