// A short training run on a slice of the real Fashion-MNIST data: the loss
// must fall and the model must beat chance by far.

#include <gtest/gtest.h>
#include <mpi.h>

#include <sstream>

#include "gpipe/io/deck.hpp"
#include "gpipe/train/driver.hpp"

namespace gpipe {
namespace {

TEST(FashionMnist, LossFallsOnASlice) {
  const std::string dir = GPIPE_FASHION_MNIST_DIR;
  const std::string text = R"(seed: 1
model:
  input: 784
  layers: [{type: dense, units: 64}, {type: relu}, {type: dense, units: 10}]
data:
  train_images: )" + dir + R"(/train-images-idx3-ubyte.gz
  train_labels: )" + dir + R"(/train-labels-idx1-ubyte.gz
  test_images: )" + dir + R"(/t10k-images-idx3-ubyte.gz
  test_labels: )" + dir + R"(/t10k-labels-idx1-ubyte.gz
  train_limit: 3000
  test_limit: 1000
training: {epochs: 3, batch_size: 64, micro_batches: 4, progress_every: 0}
optimizer: {type: adam, lr: 0.002}
)";
  const Deck deck = parse_deck(text, "slice.yaml");
  Normalization norm;
  const Dataset train = load_idx_dataset(deck.data.train_images, deck.data.train_labels,
                                         deck.data.train_limit, norm, true);
  const Dataset test = load_idx_dataset(deck.data.test_images, deck.data.test_labels,
                                        deck.data.test_limit, norm, false);
  ASSERT_EQ(train.samples, 3000);
  ASSERT_EQ(train.features, 784);
  ASSERT_EQ(test.samples, 1000);
  Pipeline<float> trainer(deck, MPI_COMM_SELF);
  const Evaluation before = trainer.evaluate(test);
  std::ostringstream log;
  const auto reports = fit(trainer, train, test, &log);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_NEAR(before.loss, std::log(10.0), 0.6);  // untrained: about chance
  EXPECT_LT(reports[0].train_loss, before.loss);
  EXPECT_LT(reports[2].train_loss, reports[0].train_loss);
  EXPECT_LT(reports[2].test.loss, before.loss / 2);
  EXPECT_GT(reports[2].test.accuracy, 0.70);
  EXPECT_NE(log.str().find("epoch 3/3: train loss"), std::string::npos) << log.str();
}

}  // namespace
}  // namespace gpipe
