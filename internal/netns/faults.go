package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// The faults of a host live in its own namespace: the nftables table
// FaultTable, whose sets hold the addresses it drops packets from (input)
// and to (output), and a netem qdisc on both ends of its veth pair. The
// kernel holds that state; nothing is kept in memory, so the chaos command
// and a test see the same faults, and removing the namespace removes them.
const (
	FaultTable = "tapes_faults"
	setIn      = "drop_in"
	setOut     = "drop_out"
)

// faultRuleset creates FaultTable: every packet from an address in drop_in
// is dropped on arrival, every packet to one in drop_out before it leaves,
// established connections included.
const faultRuleset = `table inet ` + FaultTable + ` {
	set ` + setIn + ` { type ipv4_addr; }
	set ` + setOut + ` { type ipv4_addr; }
	chain input { type filter hook input priority 0; policy accept; ip saddr @` + setIn + ` drop; }
	chain output { type filter hook output priority 0; policy accept; ip daddr @` + setOut + ` drop; }
}
`

// nft runs nft inside h's namespace.
func (h Host) nft(ctx context.Context, stdin string, args ...string) (string, error) {
	return runInput(ctx, stdin, "ip", append([]string{"netns", "exec", h.Netns, "nft"}, args...)...)
}

// Drop makes h drop every packet from the addresses from and, unless
// oneWay, every packet h sends to them: with oneWay, what they send to h is
// lost while h's own packets still arrive. Adding an address again is no
// error.
func (h Host) Drop(ctx context.Context, from []netip.Addr, oneWay bool) error {
	if len(from) == 0 {
		return fmt.Errorf("netns: %s: drop from no address", h.Name)
	}
	if _, err := h.nft(ctx, "", "list", "table", "inet", FaultTable); err != nil {
		if _, err := h.nft(ctx, faultRuleset, "-f", "-"); err != nil {
			return fmt.Errorf("netns: %s: create table %s: %w", h.Name, FaultTable, err)
		}
	}
	sets := []string{setIn}
	if !oneWay {
		sets = append(sets, setOut)
	}
	for _, set := range sets {
		if _, err := h.nft(ctx, "", "add", "element", "inet", FaultTable, set, "{ "+joinAddrs(from)+" }"); err != nil {
			return fmt.Errorf("netns: %s: drop %s: %w", h.Name, joinAddrs(from), err)
		}
	}
	return nil
}

// Undrop removes the addresses from from both of h's drop sets (those it
// does not hold are skipped).
func (h Host) Undrop(ctx context.Context, from []netip.Addr) error {
	f, err := h.Faults(ctx)
	if err != nil {
		return err
	}
	for set, have := range map[string][]netip.Addr{setIn: f.DropIn, setOut: f.DropOut} {
		var del []netip.Addr
		for _, a := range from {
			if slices.Contains(have, a) {
				del = append(del, a)
			}
		}
		if len(del) == 0 {
			continue
		}
		if _, err := h.nft(ctx, "", "delete", "element", "inet", FaultTable, set, "{ "+joinAddrs(del)+" }"); err != nil {
			return fmt.Errorf("netns: %s: undrop %s: %w", h.Name, joinAddrs(del), err)
		}
	}
	return nil
}

// Impairment is what netem does to every packet of a host, each way.
type Impairment struct {
	Delay, Jitter time.Duration
	// LossPercent of the packets are dropped at random (0-100).
	LossPercent float64
}

// IsZero reports whether it impairs nothing.
func (m Impairment) IsZero() bool { return m.Delay == 0 && m.Jitter == 0 && m.LossPercent == 0 }

// netemArgs are tc's netem parameters for m.
func (m Impairment) netemArgs() []string {
	var args []string
	if m.Delay > 0 || m.Jitter > 0 {
		args = append(args, "delay", fmt.Sprintf("%dus", m.Delay.Microseconds()))
		if m.Jitter > 0 {
			args = append(args, fmt.Sprintf("%dus", m.Jitter.Microseconds()))
		}
	}
	if m.LossPercent > 0 {
		args = append(args, "loss", fmt.Sprintf("%g%%", m.LossPercent))
	}
	return args
}

// Impair puts a netem qdisc with m on both ends of h's veth pair, so that
// every packet h sends and every packet sent to it is delayed (and lost)
// as m says; the zero Impairment removes it. The host-side end is the veth
// this package created on its bridge.
func (h Host) Impair(ctx context.Context, m Impairment) error {
	if m.Delay < 0 || m.Jitter < 0 || m.LossPercent < 0 || m.LossPercent > 100 {
		return fmt.Errorf("netns: %s: impairment delay %v jitter %v loss %g%%: want delays >= 0 and loss in 0-100", h.Name, m.Delay, m.Jitter, m.LossPercent)
	}
	if m.IsZero() {
		return h.removeNetem(ctx)
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return fmt.Errorf("%w: tc not found (apt-get install iproute2)", ErrNoNetem)
	}
	for _, side := range [][]string{{"ip", "netns", "exec", h.Netns, "tc", "qdisc", "replace", "dev", Dev}, {"tc", "qdisc", "replace", "dev", h.Veth}} {
		args := append(append(side[1:], "root", "netem"), m.netemArgs()...)
		if _, err := run(ctx, side[0], args...); err != nil {
			if strings.Contains(err.Error(), "qdisc kind is unknown") {
				err = fmt.Errorf("%w: the kernel has no netem qdisc (sch_netem): %v", ErrNoNetem, err)
			}
			return errors.Join(fmt.Errorf("netns: %s: netem: %w", h.Name, err), h.removeNetem(ctx))
		}
	}
	return nil
}

func (h Host) removeNetem(ctx context.Context) error {
	var errs []error
	if _, err := exec.LookPath("tc"); err != nil {
		return nil // no tc, no qdisc of ours
	}
	for _, side := range [][]string{{"ip", "netns", "exec", h.Netns, "tc", "qdisc", "del", "dev", Dev, "root"}, {"tc", "qdisc", "del", "dev", h.Veth, "root"}} {
		if _, err := run(ctx, side[0], side[1:]...); err != nil && !isMissing(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Heal removes every fault of h: its drop table and its netem qdiscs.
func (h Host) Heal(ctx context.Context) error {
	var errs []error
	if _, err := h.nft(ctx, "", "delete", "table", "inet", FaultTable); err != nil && !isMissing(err) {
		errs = append(errs, fmt.Errorf("netns: %s: %w", h.Name, err))
	}
	if err := h.removeNetem(ctx); err != nil {
		errs = append(errs, fmt.Errorf("netns: %s: %w", h.Name, err))
	}
	return errors.Join(errs...)
}

// Faults is a host's IP-level faults as the kernel holds them.
type Faults struct {
	// DropIn: packets from these addresses are dropped; DropOut: packets
	// to them.
	DropIn, DropOut []netip.Addr
	// Netem is tc's description of the netem qdisc inside the namespace
	// ("" when there is none).
	Netem string
}

// IsZero reports whether there is no fault.
func (f Faults) IsZero() bool { return len(f.DropIn) == 0 && len(f.DropOut) == 0 && f.Netem == "" }

// Faults reads h's faults.
func (h Host) Faults(ctx context.Context) (Faults, error) {
	var f Faults
	if _, err := h.nft(ctx, "", "list", "table", "inet", FaultTable); err == nil {
		for _, s := range []struct {
			name string
			dst  *[]netip.Addr
		}{{setIn, &f.DropIn}, {setOut, &f.DropOut}} {
			out, err := h.nft(ctx, "", "-j", "list", "set", "inet", FaultTable, s.name)
			if err != nil {
				return f, fmt.Errorf("netns: %s: %w", h.Name, err)
			}
			if *s.dst, err = setElements(out); err != nil {
				return f, fmt.Errorf("netns: %s: set %s: %w", h.Name, s.name, err)
			}
		}
	}
	if _, err := exec.LookPath("tc"); err == nil {
		out, err := run(ctx, "ip", "netns", "exec", h.Netns, "tc", "qdisc", "show", "dev", Dev)
		if err != nil {
			return f, fmt.Errorf("netns: %s: %w", h.Name, err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, " netem ") {
				f.Netem = strings.TrimSpace(line)
			}
		}
	}
	return f, nil
}

// setElements parses `nft -j list set`: the elements are strings (an
// address each).
func setElements(out string) ([]netip.Addr, error) {
	var doc struct {
		Nftables []struct {
			Set *struct {
				Elem []json.RawMessage `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, o := range doc.Nftables {
		if o.Set == nil {
			continue
		}
		for _, e := range o.Set.Elem {
			var s string
			if err := json.Unmarshal(e, &s); err != nil {
				return nil, fmt.Errorf("element %s: not an address", e)
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, err
			}
			addrs = append(addrs, a)
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return addrs, nil
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
