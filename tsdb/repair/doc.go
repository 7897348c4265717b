// Package repair keeps every shard at rf copies: a Repairer compares the pairs this
// node holds with their owners (everything in a full pass, what changed between
// them, what moved after a membership change), pushes what an owner lacks, replaces
// what this node cannot read, hands everything off when the node leaves, and repairs
// the catalog the same way. Hints keep the points a replica did not acknowledge until
// the next pass delivers them. It reaches owners through package cluster and asks the
// series registry for nothing but a redeclared type (Types).
package repair
