package sink

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// An SQLite database of the user's, with tables of its own, is not turned
// into a sink beside them: Open refuses it and changes nothing.
func TestOpenRefusesAnUnrelatedDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE orders (id INTEGER)`); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path, Options{})
	if !errors.Is(err, ErrNotASink) || !strings.Contains(err.Error(), "(orders, users)") {
		t.Fatalf("Open = %v; want ErrNotASink naming orders and users", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN ('effects', 'balances', 'processed')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the sink's tables were added anyway: %d, %v", n, err)
	}
	// An empty database, and a sink, open as before.
	openSink(t, filepath.Join(t.TempDir(), "new.db"), false)
	sinkPath := filepath.Join(t.TempDir(), "s.db")
	openSink(t, sinkPath, true).Close()
	openSink(t, sinkPath, true)
}
