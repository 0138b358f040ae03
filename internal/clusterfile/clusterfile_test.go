package clusterfile

import (
	"errors"
	"reflect"
	"testing"
)

func TestBootstrapPrefersFlagThenFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Bootstrap("", dir); err == nil {
		t.Fatalf("no cluster file must be an error")
	}
	f := &File{Processes: []Process{
		{Name: "broker-1", Kind: "broker", ID: 1, Address: "127.0.0.1:1"},
		{Name: "consumer-1", Kind: "consumer", Address: "127.0.0.1:9"},
		{Name: "broker-2", Kind: "broker", ID: 2, Address: "127.0.0.1:2"},
	}}
	if err := Write(dir, f); err != nil {
		t.Fatal(err)
	}
	got, err := Bootstrap("", dir)
	if err != nil || !reflect.DeepEqual(got, []string{"127.0.0.1:1", "127.0.0.1:2"}) {
		t.Fatalf("Bootstrap from file = %v, %v", got, err)
	}
	got, err = Bootstrap(" 127.0.0.1:7 ,,127.0.0.1:8", dir)
	if err != nil || !reflect.DeepEqual(got, []string{"127.0.0.1:7", "127.0.0.1:8"}) {
		t.Fatalf("Bootstrap from flag = %v, %v", got, err)
	}
	if _, err := Bootstrap(" , ", dir); !errors.Is(err, ErrNoBrokers) {
		t.Fatalf("empty flag: %v", err)
	}
	back, err := Read(dir)
	if err != nil || back.Version != 1 || len(back.Processes) != 3 {
		t.Fatalf("Read = %+v, %v", back, err)
	}
}
