package dht

import "fmt"

// Routing is how a node finds the owners of an ID: one mode per cluster,
// refused at join like a differing quantum.
type Routing uint8

const (
	// RoutingFull: memberlist gives every node the full member list, and a
	// replica set is computed locally over it, with no network hop. Right for
	// a LAN of tens to hundreds of boards.
	RoutingFull Routing = iota + 1
	// RoutingKademlia: a node knows only its kbucket table. It bootstraps
	// from seeds, learns peers through FIND_NODE and bucket refresh, and
	// finds a replica set by iterative lookup, cached per ID and dropped when
	// one of its members fails. For clusters past one LAN, or past what full
	// membership carries.
	RoutingKademlia
)

// String returns "full" or "kademlia".
func (r Routing) String() string {
	switch r {
	case RoutingFull:
		return "full"
	case RoutingKademlia:
		return "kademlia"
	}
	return fmt.Sprintf("routing(%d)", uint8(r))
}

// ParseRouting accepts "full" or "kademlia", as on the command line.
func ParseRouting(s string) (Routing, error) {
	switch s {
	case "full":
		return RoutingFull, nil
	case "kademlia":
		return RoutingKademlia, nil
	}
	return 0, fmt.Errorf("unknown routing mode %q: want full or kademlia", s)
}
