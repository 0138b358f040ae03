package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// add is `cluster brokers add [--id N]`: it asks the launcher of --dir to
// start one more brokerd with --join (a fresh data directory, loopback
// ports), waits until the broker is registered, alive and serving, and
// prints its row as `cluster brokers list` does. The id defaults to the
// highest one the cluster knows (registered, removed, or in cluster.json)
// plus one; a registered or removed id is refused with nothing started.
func (c *brokersCommand) add(ctx context.Context, args []string) error {
	var (
		t    clusterTarget
		id   int
		wait time.Duration
	)
	fs := commandFlags("brokers add",
		"Starts one more broker in the running cluster, under the launcher of --dir (cluster up): brokerd --join with a\n"+
			"fresh data directory DIR/broker-ID and free loopback ports. The broker registers with the controller quorum,\n"+
			"whose leader adds it (a non-voter; promoted once there are members enough for 3 or 5 voters); it holds no replica\n"+
			"until a reassignment moves one onto it (cluster topics reassign). Waits until it is registered, alive and\n"+
			"serving, then prints its row as cluster brokers list does. cluster.json lists it; stopping cluster up stops it.", c.stderr)
	t.addFlags(fs)
	fs.IntVar(&id, "id", 0, "the new broker's id (default: the highest id the cluster knows, registered, removed or in cluster.json, plus one); a registered or removed id is refused")
	fs.DurationVar(&wait, "wait-timeout", 60*time.Second, "how long to wait for the new broker to register and serve")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: brokers add takes no arguments, got %q (the id is --id N)", errUsage, pos)
	}
	if id < 0 || id > 1<<31-1 {
		return fmt.Errorf("%w: --id %d: want a positive integer", errUsage, id)
	}
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	f, cl, md, err := t.underLauncher(rctx, "brokers add starts the broker")
	if err != nil {
		return err
	}
	defer cl.Close()
	known := slices.Clone(md.GetRemovedBrokerIds())
	for _, b := range md.GetBrokers() {
		known = append(known, b.GetId())
	}
	for _, p := range f.Brokers() {
		known = append(known, p.ID)
	}
	newID := int32(id)
	if newID == 0 {
		newID = slices.Max(append(known, 0)) + 1
	}
	for _, b := range md.GetBrokers() {
		if b.GetId() == newID {
			return kerr.New(kerr.DuplicateBrokerRegistration, "broker id %d is already registered (at %s); nothing was started", newID, b.GetAddress())
		}
	}
	if slices.Contains(md.GetRemovedBrokerIds(), newID) {
		return kerr.New(kerr.InvalidRequest, "broker id %d was removed from the cluster (cluster brokers remove) and cannot register again; nothing was started", newID)
	}
	cc, err := grpc.NewClient(f.Control, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	resp, err := tapesv1.NewClusterControlServiceClient(cc).StartBroker(rctx, &tapesv1.StartBrokerRequest{BrokerId: newID})
	if err != nil {
		return fmt.Errorf("start broker %d: %w", newID, err)
	}
	p := resp.GetProcess()
	fmt.Fprintf(c.stderr, "Started broker %d (pid %d) at %s; log %s. Waiting for it to register.\n", newID, p.GetPid(), p.GetAddress(), p.GetLog())
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	md, err = waitJoined(wctx, cl, newID, p.GetAddress())
	if err != nil {
		return fmt.Errorf("broker %d (pid %d) started but is not registered and serving after %v (it keeps running; see its log %s): %w", newID, p.GetPid(), wait, p.GetLog(), err)
	}
	return brokerTable(c.stdout, md, []int32{newID})
}

// waitJoined waits until broker id, at addr, is registered and alive in
// the cluster's metadata and serves clients itself (it answers BrokerService
// only once registered and caught up with the controller log), and returns
// that metadata.
func waitJoined(ctx context.Context, cl *client.Client, id int32, addr string) (*tapesv1.MetadataResponse, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	own := tapesv1.NewBrokerServiceClient(cc)
	var last error
	for {
		md, err := cl.Metadata(ctx, nil, false)
		if err == nil {
			err = fmt.Errorf("not registered yet")
			for _, b := range md.GetBrokers() {
				if b.GetId() == id && !b.GetAlive() {
					err = fmt.Errorf("registered, not alive yet")
				} else if b.GetId() == id {
					if _, err = own.Metadata(ctx, &tapesv1.MetadataRequest{NoTopics: true}); err != nil {
						err = kerr.FromStatus(err)
					}
				}
			}
			if err == nil {
				return md, nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, last
		case <-time.After(250 * time.Millisecond):
		}
	}
}
